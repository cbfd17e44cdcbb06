"""Builds the store's and the app's compiled loops, and the gRPC front's protocol stubs (generated
from app/grpc/protocol/*.proto by grpcio-tools at every build, never committed)."""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

PROTOCOL_DIR = Path("app/grpc/protocol")


def generate_protocol_stubs() -> None:
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    for proto in sorted(PROTOCOL_DIR.glob("*.proto")):
        args = ["protoc", "-I.", f"-I{well_known}", "--python_out=.", "--pyi_out=.", str(proto)]
        if proto.name == "service.proto":
            args.insert(-1, "--grpc_python_out=.")
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


class BuildPyWithStubs(build_py):
    def run(self):
        generate_protocol_stubs()
        super().run()


class BuildExtWithStubs(build_ext):
    def run(self):
        generate_protocol_stubs()
        super().run()


setup(
    cmdclass={"build_py": BuildPyWithStubs, "build_ext": BuildExtWithStubs},
    ext_modules=[
        Extension("store.format._recordio", ["store/format/_recordio.c"], libraries=["z"],
                  extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"]),
        Extension("app._ndjson", ["app/_ndjson.c"],
                  extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"]),
    ],
)
