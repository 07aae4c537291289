"""How well the twin tracks reality (evaluation only: it reads the oracle): twin-vs-truth metrics, the standard
sync scenario with its faults, and recordings and plots of sync runs."""
