"""Reading eval files into results: eval sets and caches, aggregation, U-shapes, age of acquisition,
scaling grids, regions, case studies, human baselines, curves, reports and their plots."""
