"""The dynamic-market benchmark: capacity that drains, restocks and reclaims over modelled hours,
and requests that may wait up to 12 hours for it (`python -m bench.dynamic`)."""
