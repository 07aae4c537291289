"""System identification: the twin learns the world's dynamics from its own online episodes.

`records` reads what identification needs from an online dataset (the real arm's measured joints, the commands
sent to it, the corrected twin's object trajectory); `objects` identifies the objects' dynamics by replaying the
uncorrected twin, driven by the real arm's measured motion, against the object trajectory the corrected twin saw.
Nothing here reads the oracle.
"""
