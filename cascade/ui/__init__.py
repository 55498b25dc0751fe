"""The page: layout and wiring (`layout`), what each action does (`handlers`), the text as coloured
tokens (`tokens`), the perplexity chart (`chart`), the run in sentences (`sentences`), and the one
engine the page's visitors share (`service`)."""
