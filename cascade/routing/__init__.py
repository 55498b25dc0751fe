"""When the big model steps in: the draft's readings, the deferral rules, the router, curves (no model runs here)."""
