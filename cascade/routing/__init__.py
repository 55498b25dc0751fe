"""When should the big model step in: the draft's reading of a position, the deferral rules, the learned
router, and their curves. Pure functions on the draft's rows and on recorded readings; no model runs here."""
