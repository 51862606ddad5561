"""gpufill: get scarce AWS GPU instances and keep track of every one launched."""
