"""realissim: a continuously corrected physics digital twin as the only interface between a robot
policy and the world ("Real-is-Sim"), with the sim-to-real toolbox around it."""

__version__ = "0.1.0"
