"""The image encoder's network: a ResNet-style convolutional trunk with GroupNorm (batch statistics are
a poor fit for the small, correlated batches of behaviour cloning, as Diffusion Policy found), a
spatial-softmax head that turns each of K feature maps into the expected image position of its activation
(2K numbers: where things are, which is what pushing needs), and a linear map to the feature size.

Shapes: images (B, H, W, 3) uint8 RGB in → features (B, D) float32 out. In training mode a random crop of
`crop` px (per sample) is taken, in eval mode the centre crop, so train and test see the same scale.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional

from realissim.learn.config import VisionConfig


class BasicBlock(nn.Module):
    """ResNet's basic block with GroupNorm: (B, C_in, H, W) → (B, C_out, H/stride, W/stride)."""

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.skip = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.GroupNorm(groups, c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        h = functional.relu(self.norm1(self.conv1(x)))
        return functional.relu(self.norm2(self.conv2(h)) + self.skip(x))


class SpatialSoftmax(nn.Module):
    """(B, C, H, W) → (B, 2K): a 1×1 convolution to K maps, a softmax over each map's pixels, and the expected
    (x, y) in [−1, 1] of each."""

    def __init__(self, channels: int, keypoints: int) -> None:
        super().__init__()
        self.project = nn.Conv2d(channels, keypoints, 1)

    def forward(self, x: Tensor) -> Tensor:
        maps = self.project(x)
        b, k, h, w = maps.shape
        weights = torch.softmax(maps.reshape(b, k, h * w), dim=-1)
        ys, xs = torch.meshgrid(
            torch.linspace(-1, 1, h, dtype=x.dtype), torch.linspace(-1, 1, w, dtype=x.dtype), indexing="ij"
        )
        grid = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)  # (HW, 2)
        return (weights @ grid).reshape(b, 2 * k)


class ImageTrunk(nn.Module):
    """uint8 images (B, H, W, 3) → features (B, D)."""

    def __init__(self, config: VisionConfig = VisionConfig()) -> None:
        super().__init__()
        self.config = config
        w0 = config.widths[0]
        self.stem = nn.Sequential(nn.Conv2d(3, w0, 5, 2, 2, bias=False), nn.GroupNorm(config.groups, w0), nn.ReLU())
        layers, c_in = [], w0
        for s, width in enumerate(config.widths):
            for b in range(config.blocks):
                layers.append(BasicBlock(c_in, width, 2 if (b == 0 and s > 0) else 1, config.groups))
                c_in = width
        self.stages = nn.Sequential(*layers)
        self.head = SpatialSoftmax(c_in, config.keypoints)
        self.out = nn.Sequential(nn.Linear(2 * config.keypoints, config.features), nn.LayerNorm(config.features))
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1))

    def crop(self, x: Tensor) -> tuple[Tensor, Tensor, int]:
        """(B, 3, H, W) → (B, 3, c, c) per-sample random crops in training, the centre crop in eval; with each
        crop's (left, top) offset (B, 2) px in the image, and its side c px."""
        c = self.config.crop
        b, _, h, w = x.shape
        if c is None or (c >= h and c >= w):
            return x, torch.zeros(b, 2), w  # (an uncropped non-square image: side = width)
        c = min(c, h, w)
        if not self.training:
            top, left = (h - c) // 2, (w - c) // 2
            offsets = torch.tensor([[float(left), float(top)]]).expand(b, 2)
            return x[:, :, top : top + c, left : left + c], offsets, c
        tops = torch.randint(0, h - c + 1, (b,))
        lefts = torch.randint(0, w - c + 1, (b,))
        rows = (tops[:, None] + torch.arange(c)[None]).reshape(b, 1, c, 1).expand(b, 3, c, w)
        x = torch.gather(x, 2, rows)
        cols = (lefts[:, None] + torch.arange(c)[None]).reshape(b, 1, 1, c).expand(b, 3, c, c)
        return torch.gather(x, 3, cols), torch.stack([lefts, tops], dim=1).float(), c

    def keypoints(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """uint8 images (B, H, W, 3) → the spatial softmax's keypoints (B, K, 2) in [−1, 1] over the crop, and
        the same keypoints (B, K, 2) as (u, v) pixels of the whole image (for geometry: `realissim.learn.lift`)."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        x, offsets, side = self.crop(x)
        kp = self.head(self.stages(self.stem((x - self.mean) / self.std))).reshape(len(x), -1, 2)
        return kp, offsets[:, None, :] + (kp + 1.0) * (0.5 * side)

    def forward(self, images: Tensor) -> Tensor:
        kp, _ = self.keypoints(images)
        return self.out(kp.reshape(len(kp), -1))
