"""Plan: cost models, the capture-size planner, the what-if engine, ladder comparison."""
