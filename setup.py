"""A learning-based tensor program auto-tuner over Apache TVM TensorIR schedules."""

from pathlib import Path

from setuptools import find_packages, setup

version = {}
exec(Path("search/version.py").read_text(), version)

setup(
    name="autotune",
    version=version["__version__"],
    description="Learning-based auto-tuner for matmul and convolution kernels (TVM, LightGBM, torch)",
    long_description=Path("README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tuner*", "cost_model*", "search*", "workloads*"]),
    package_data={"workloads": ["suites/*.json", "py.typed"], "cost_model": ["pretrained/*", "py.typed"],
                  "search": ["py.typed"], "tuner": ["py.typed"]},
    install_requires=[
        # ffi 0.1.15 makes tvm.ir.save_json (and MetaSchedule's database) segfault: pin both.
        "apache-tvm==0.27.0.post1",
        "apache-tvm-ffi==0.1.14.post0",
        "numpy",
        "lightgbm",
        # The CPU build; an unpinned torch pulls a CUDA build of several GB.
        "torch==2.13.0",
        "pandas",
        "tqdm",
        "filelock",
    ],
    extras_require={
        # The tests and the type check. tornado and cloudpickle: TVM's RPC tracker and server; psutil:
        # the RPC test reads which addresses the servers listen on.
        "dev": ["pytest", "pytest-timeout", "tornado", "cloudpickle", "psutil", "nbclient", "nbformat", "ipykernel",
                "matplotlib", "mypy", "ray>=2.52"],
        # Measuring on the machines of a Ray cluster (tuner.RayMeasurer, --ray-address): plain Ray, no dashboard.
        "distributed": ["ray>=2.52"],
        # Only to run MetaSchedule as a baseline in benchmarks/; xgboost pulls a CUDA NCCL wheel.
        "baseline": ["xgboost", "psutil", "cloudpickle"],
    },
    entry_points={"console_scripts": ["autotune=tuner.cli:main"]},
)
