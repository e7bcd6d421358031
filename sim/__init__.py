"""Golden models (bit-exact NumPy references of every block) and simulator back ends."""
