"""CPU cores: the node's cores divided among running attempts, and each job's speed per core."""
