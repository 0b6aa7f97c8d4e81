"""What turns the scheduler's decisions into running processes: ``base.py`` the protocol;
``local/`` process groups on this machine, ``ray_*.py`` actors on a Ray cluster, ``fake.py`` none (tests).

Kept import-free: ``python -m apportion.executors.local.wrapper`` starts with every attempt.
"""
