"""What estimates the world from camera images, through the twin's views: the visual-force correction
(`correction`), where the cameras see each object (`sighting`), the global search for a lost object (`search`) and
its placement in the twin (`placement`), and calibration — cameras from a dot board (`board_calibration`) or
photometrically (`camera_refine`), the Gaussians' colours (`color_fit`)."""
