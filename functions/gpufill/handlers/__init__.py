"""One thin module per Lambda task: parse the event, call policy or an adapter, return."""
