"""The paper's experiments and the suite's own: speedups, scaling, reach, large NLP, calibration,
validations against real runs, the planner's gap."""
