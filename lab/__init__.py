"""The lab: the tools that build what the package ships (the learned router, the budget's calibration)
and the maintainers' load and speed benches. Not installed; it imports `cascade`, and nothing in `cascade`
imports it. `python -m lab --help` lists its commands; lab/README.md says what each is for."""
