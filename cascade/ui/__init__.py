"""The page (Gradio), one module per thing a visitor does or sees: `layout` wires it, the actions
(`generate`, `whatif`, `branches`, `followups`, `link`, `runfile`) answer with a `run.Update`, and the
views (`tokens`, `hover`, `chart`, `sentences`, ...) are pure functions of a run's events."""
