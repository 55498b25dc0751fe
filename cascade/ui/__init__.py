"""The page: layout and wiring (`layout`), what each action does (`handlers`), the text as coloured
tokens (`tokens`), the per-token chart and the rules' curves (`chart`), the run in sentences
(`sentences`), what the page says about each deferral rule (`rulewords`), and the engines the page's
visitors share (`service`)."""
