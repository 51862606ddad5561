"""Pure decisions: no boto3, no clock, no I/O. Everything here is tested directly."""
