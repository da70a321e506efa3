"""What the pipeline writes from the experiments: tables, figures, the paper's claims, the README's
results and regression tracking against a committed reference."""
