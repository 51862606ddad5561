"""Data access: the only modules that talk to AWS. Each call site is small and named for its job."""
