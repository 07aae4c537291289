"""What the twin looks like and how it is rendered: its Gaussians bound to the model's bodies (`appearance`), its
renders into the real cameras with the key light's shadow (`cameras.TwinViews`, `shadows`), and the policy's
virtual cameras, static and wrist (`virtual`)."""
