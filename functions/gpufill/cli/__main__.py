from gpufill.cli import entry_point

entry_point()
