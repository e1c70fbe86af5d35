"""MinAtar's games (Young and Tian, 2019) as tensor environments, checked step by step against ``minatar``."""
