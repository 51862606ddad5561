"""The local engine: the real state machine file on moto, with a simulated GPU market. Never shipped to Lambda."""
