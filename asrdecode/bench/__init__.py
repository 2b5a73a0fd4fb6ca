"""Benchmarks as commands: decoder sweeps against peers (`asrdecode bench sweep`) and the peers."""
