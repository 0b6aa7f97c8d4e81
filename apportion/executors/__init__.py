"""What turns the scheduler's decisions into running processes: local process groups (more to come).

Kept import-free: ``python -m apportion.executors.local.wrapper`` starts with every attempt.
"""
