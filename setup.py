"""Package mapping only; all metadata lives in pyproject.toml.

The design's top-level folders (api/, worker/, operator/, dashboard/) are installed under
one import package, ``specd``, so the folder ``operator/`` never shadows the standard
library's ``operator`` module: ``import operator`` stays the stdlib, ``import
specd.operator`` is ours.
"""

from setuptools import find_packages, setup

ROOTS = {
    "specd": "specd",
    "specd.api": "api",
    "specd.worker": "worker",
    "specd.operator": "operator",
    "specd.dashboard": "dashboard",
    "specd.pilot": "pilot",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for package, folder in ROOTS.items():
    package_dir[package] = folder
    packages.append(package)
    for sub in find_packages(folder):
        packages.append(f"{package}.{sub}")
        package_dir[f"{package}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.yaml", "*.json", "*.safetensors", "*.jsonl", "*.txt", "*.md",
                       "*.mako"]},
    include_package_data=True,
)
