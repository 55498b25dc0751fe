"""The lab's commands, one module per group, each registering its parser and runner as a `cascade.cli`
`Command`; `lab/__main__.py` lists them."""
