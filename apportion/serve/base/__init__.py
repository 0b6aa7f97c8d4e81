"""What every room stands on: bounds on what a request may carry, the slots and nodes a server offers
(and which are offline), owner-only and trusted files, a full disk, loopback addresses.

May import: nothing else in serve."""
