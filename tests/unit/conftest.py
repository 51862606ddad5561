"""Fixtures shared by the unit tests of the adapters."""

from dynamodb_table import table  # noqa: F401  (the instances table in moto, for the adapters that use it)
