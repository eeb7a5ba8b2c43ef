"""Builds the ktune package. Its gRPC stubs, ktune/ktune_pb2.py and
ktune/ktune_pb2_grpc.py, are generated here from ktune's wire API,
proto/ktune.proto (../proto beside this directory, or the file $KTUNE_PROTO
names), with grpc_tools.protoc; they are never kept in the source tree.
Everything else is in pyproject.toml."""
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_file():
    path = os.environ.get("KTUNE_PROTO") or os.path.join(HERE, os.pardir, "proto", "ktune.proto")
    if not os.path.isfile(path):
        raise SystemExit("ktune: no %s to generate the gRPC stubs from (set KTUNE_PROTO to "
                         "the repository's proto/ktune.proto)" % path)
    return path


def generate_stubs(out_dir):
    """Write ktune/ktune_pb2.py and ktune/ktune_pb2_grpc.py under out_dir."""
    from grpc_tools import protoc

    # Compiled as ktune/ktune.proto, the stubs import each other as
    # `from ktune import ktune_pb2`, which works inside the package.
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "ktune"))
        staged = os.path.join(tmp, "ktune", "ktune.proto")
        shutil.copyfile(proto_file(), staged)
        rc = protoc.main(["grpc_tools.protoc", "-I" + tmp, "--python_out=" + out_dir,
                          "--grpc_python_out=" + out_dir, staged])
    if rc != 0:
        raise SystemExit("ktune: grpc_tools.protoc failed on %s (status %d)" % (proto_file(), rc))


class BuildPyWithStubs(build_py):
    """build_py, then the stubs beside the package's modules."""

    def run(self):
        super().run()
        # An editable install imports the package from the source tree.
        generate_stubs(HERE if getattr(self, "editable_mode", False) else self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
