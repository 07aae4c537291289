"""The applications behind the `realissim` verbs: the main demo (`demo`, the closed loop, correction on against
off), the twin-only push (`push`), the surrogate driven alone (`surrogate`) and demonstration collection
(`collect`). Each runs episodes through `eval.episode.run_episode`, records what it needs and returns a report."""
