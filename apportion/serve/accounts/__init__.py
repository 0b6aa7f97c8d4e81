"""Who calls and what they may hold: credentials, wrong-credential throttling, the OS account a
job runs as, and each user's budgets.

May import: base, store."""
