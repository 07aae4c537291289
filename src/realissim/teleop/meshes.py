"""The twin's collision geometry as triangle meshes, one per body and colour, for a 3D viewer.

Read from the twin's MuJoCo model, so it shows exactly what the twin simulates, for any task: the
table plane, the arm's capsules, the pusher rod, and each object as its union of spheres. Vertices
are in the body's frame; a viewer places each mesh at its body's world pose every frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import trimesh

from realissim.geometry import quat_to_mat

SPHERE_SUBDIVISIONS = 2
"""Icosphere refinement of spheres and capsule caps (162 vertices per sphere)."""
CAPSULE_SECTIONS = 16


@dataclass(frozen=True)
class BodyMesh:
    """The geoms of one colour on one body: vertices (V, 3) float32 m in the body frame, faces (F, 3) int32,
    colour (3,) uint8 RGB."""

    body: int
    """MuJoCo body id (0: the world, whose meshes never move)."""
    name: str
    """Unique name: the body's, with the colour's index on the body when it has several."""
    vertices: np.ndarray
    faces: np.ndarray
    color: tuple[int, int, int]


def _geom_mesh(model: mujoco.MjModel, g: int) -> trimesh.Trimesh | None:
    """Geom `g` in its own frame (None for types not drawn)."""
    kind, size = int(model.geom_type[g]), model.geom_size[g]
    if kind == mujoco.mjtGeom.mjGEOM_PLANE:
        return trimesh.creation.box(extents=(2 * size[0], 2 * size[1], 1e-3), transform=_shift_z(-5e-4))
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return trimesh.creation.icosphere(subdivisions=SPHERE_SUBDIVISIONS, radius=float(size[0]))
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return trimesh.creation.capsule(height=2 * float(size[1]), radius=float(size[0]), count=(CAPSULE_SECTIONS,) * 2)
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return trimesh.creation.cylinder(radius=float(size[0]), height=2 * float(size[1]), sections=CAPSULE_SECTIONS)
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return trimesh.creation.box(extents=2 * size)
    return None


def _shift_z(z: float) -> np.ndarray:
    transform = np.eye(4)
    transform[2, 3] = z
    return transform


def body_meshes(model: mujoco.MjModel) -> list[BodyMesh]:
    """Every visible geom (alpha > 0) of `model`, merged per (body, colour), in body frames."""
    groups: dict[tuple[int, tuple[int, int, int]], list[trimesh.Trimesh]] = {}
    for g in range(model.ngeom):
        if model.geom_rgba[g][3] <= 0:
            continue
        mesh = _geom_mesh(model, g)
        if mesh is None:
            continue
        pose = np.eye(4)
        pose[:3, :3] = quat_to_mat(model.geom_quat[g])
        pose[:3, 3] = model.geom_pos[g]
        mesh.apply_transform(pose)
        color = tuple(round(255 * float(c)) for c in model.geom_rgba[g][:3])
        groups.setdefault((int(model.geom_bodyid[g]), color), []).append(mesh)  # type: ignore[arg-type]
    out, seen = [], {}
    for (body, color), meshes in groups.items():
        merged = trimesh.util.concatenate(meshes)
        base = model.body(body).name or "world"
        seen[base] = seen.get(base, -1) + 1
        name = base if seen[base] == 0 else f"{base}_{seen[base]}"
        faces = np.asarray(merged.faces, dtype=np.int32)
        out.append(BodyMesh(body, name, np.asarray(merged.vertices, dtype=np.float32), faces, color))  # type: ignore[arg-type]
    return out
