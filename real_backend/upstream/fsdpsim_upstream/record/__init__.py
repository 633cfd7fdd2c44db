"""`fsdpsim record`: the injected tracer (inject/) and the writer that turns its per-rank
event logs into a `.seq` (write.py)."""
