"""Behaviour cloning by conditional flow matching: the learner (docs/design.md §9).

Above the seam (`realissim.policy`), the episode store (`realissim.data`) and the environments: observation
encoders (`observations`, `vision`, `lift`), the 1D temporal U-Net (`unet`, `layers`), rectified flow (`flow`),
the model with its normalisers (`model`, `normalizer`), the training data (`dataset`, `image_cache`), training
(`train`), checkpoints (`checkpoint`, `info`) and the trained policy (`flow_policy.FlowPolicy`). Evaluation never
imports it: `FlowPolicy.load` is registered as the "flow" policy loader (`policy.factory`, pyproject.toml).
"""
