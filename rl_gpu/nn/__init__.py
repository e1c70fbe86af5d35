"""Networks: layers, distributions, normalisers and actor-critics."""
