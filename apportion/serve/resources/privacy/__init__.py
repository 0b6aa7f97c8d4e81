"""Privacy budget: the ledger of data blocks and claims in the state file."""
