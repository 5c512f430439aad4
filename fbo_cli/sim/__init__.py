"""The simulator: the federation (ledger, oracles, sampling, aggregation), client stacks, bounds."""
