"""The page, one room per thing a visitor does or sees.

- `layout` builds the page and wires each event once; `controls` are the request's controls, one per
  setting; `guide` is the page's own words (INTRO, HOW_TO_READ).
- What each action does: `generate` (Generate, Compare, Stop, over one event pump), `whatif` (another
  share, threshold or rule), `branches` (the session's runs, forks from a token), `followups` (a follow-up
  question), `link` (a link that replays a run), `runfile` (a run kept in one HTML file, "Download").
- `run`: a run as the page remembers it, and the `Update` of the outputs a handler changes.
- The pictures, pure functions of a run's events: `tokens` (the coloured text), `hover` (a token's
  details), `chart` (the per-token chart and the rules' curves), `sentences` (the run in words),
  `rulewords` (each rule's words), `conversation` (earlier turns), `runwords` (a run file's tables),
  `quality` (the measured pass rates), `style` (colours and formats).
"""
