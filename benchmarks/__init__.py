"""Scripts that print figures, in folders by kind (benchmarks/README.md lists each one and its target)."""
