"""The executor on a Slurm cluster: ``executor.py`` submits each attempt as a Slurm job, ``task.py`` runs
one rank of it on its node (the local wrapper's contract), ``nodes.py`` reads what Slurm says of its nodes
and jobs, ``commands.py`` runs Slurm's commands (only this package calls them), ``local_cluster.py``
starts a Slurm on this machine for tests and benchmarks.
"""
