"""IAM in the local engine: every AWS call is judged against the calling principal's policies
before the simulated service answers (docs/iam.md)."""
