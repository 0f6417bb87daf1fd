"""Disaggregated serving from the command line: the [deployment] table (config), each
pool's setup (setup), simulate's run of it (command) and its flags (options)."""
