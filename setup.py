from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("store._recordio", ["store/_recordio.c"], libraries=["z"],
                  extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"]),
    ],
)
