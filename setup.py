from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("store.format._recordio", ["store/format/_recordio.c"], libraries=["z"],
                  extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"]),
        Extension("app._ndjson", ["app/_ndjson.c"],
                  extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"]),
    ],
)
