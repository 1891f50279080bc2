"""Failures of the SSD path raise through ssdtrain.offload: an injected EIO, a
corrupted file, an exception in user code, Ctrl-C and SIGTERM. Each raises (or
ends the process) with the saved tensor and the file named, training never
sees the bytes, and nothing is left on disk."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

import ssdtrain
from gpt import GPT, batch, loss_fn


def all_files(root):
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


class OffloadFailures(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ssdtrain-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        torch.manual_seed(0)
        self.model = GPT()
        self.idx, self.targets = batch(0)

    def test_eio_on_a_write_raises_in_forward_naming_tensor_and_file(self):
        # The 4th write request fails with EIO; its wait comes at a leaf-module
        # boundary of forward, so forward raises.
        off = ssdtrain.offload(self.model, self.dir, policy="offload-ssd", faults=[("write", 3, "eio", 1)])
        with self.assertRaises(ssdtrain.OffloadError) as cm:
            with off:
                loss_fn(self.model(self.idx), self.targets).backward()
        msg = str(cm.exception)
        self.assertRegex(msg, r"writing saved tensor \S+:saved\d+ \(float32 \[")
        self.assertRegex(msg, r"\S+/ssdtrain-[^/ ]+/t\d+\.bin")
        self.assertRegex(msg, r"(?i)input/output error|EIO")
        self.assertEqual(off.stats()["faults_injected"], 1)
        self.assertEqual(all_files(self.dir), [])
        self.assertEqual(os.listdir(self.dir), [])

    def test_eio_on_a_read_raises_in_backward_and_no_gradient_is_made(self):
        off = ssdtrain.offload(self.model, self.dir, policy="offload-ssd", faults=[("read", 0, "eio", 1)])
        with self.assertRaises(ssdtrain.OffloadError) as cm:
            with off:
                loss = loss_fn(self.model(self.idx), self.targets)
                loss.backward()
        msg = str(cm.exception)
        self.assertRegex(msg, r"reading saved tensor \S+:saved\d+")
        self.assertRegex(msg, r"\S+/ssdtrain-[^/ ]+/t\d+\.bin")
        self.assertRegex(msg, r"(?i)input/output error|EIO")
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_corrupt_extent_raises_a_checksum_mismatch_not_zeros(self):
        off = ssdtrain.offload(self.model, self.dir, policy="offload-ssd")
        with self.assertRaises(ssdtrain.OffloadError) as cm:
            with off:
                loss = loss_fn(self.model(self.idx), self.targets)
                files = all_files(off.run_dirs()[0])
                self.assertGreater(len(files), 0)
                for path in files:  # flip one byte in every file written so far
                    with open(path, "r+b") as f:
                        f.seek(100)
                        b = f.read(1)
                        f.seek(100)
                        f.write(bytes([b[0] ^ 0xFF]))
                loss.backward()
        msg = str(cm.exception)
        self.assertIn("checksum mismatch", msg)
        self.assertRegex(msg, r"reading saved tensor \S+:saved\d+")
        self.assertRegex(msg, r"\S+/ssdtrain-[^/ ]+/t\d+\.bin")
        self.assertEqual(os.listdir(self.dir), [])

    def test_an_exception_in_training_code_removes_the_files(self):
        with self.assertRaisesRegex(ValueError, "user code"):
            with ssdtrain.offload(self.model, self.dir, policy="offload-ssd") as off:
                loss_fn(self.model(self.idx), self.targets)
                self.assertGreater(len(all_files(off.run_dirs()[0])), 0)
                raise ValueError("user code")
        self.assertEqual(os.listdir(self.dir), [])

    def run_and_signal(self, sig):
        """Runs a training step in a child that sends itself `sig` from the 6th
        leaf module of forward, when files exist; returns (returncode, stderr)."""
        script = textwrap.dedent(f"""
            import os, signal, sys, torch
            # Ctrl-C raises KeyboardInterrupt here also when this suite was
            # started with SIGINT ignored (a background job), which Python keeps.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            import ssdtrain
            from gpt import GPT, batch, loss_fn
            torch.manual_seed(0)
            model = GPT()
            calls = []
            def hook(m, a):
                calls.append(1)
                if len(calls) == 6:
                    assert os.listdir(off.run_dirs()[0]), "no file written yet"
                    os.kill(os.getpid(), {int(sig)})
            model.blocks[1].fc1.register_forward_pre_hook(hook)
            model.blocks[1].fc2.register_forward_pre_hook(hook)
            model.blocks[2].fc1.register_forward_pre_hook(hook)
            model.blocks[2].fc2.register_forward_pre_hook(hook)
            model.blocks[3].fc1.register_forward_pre_hook(hook)
            model.blocks[3].fc2.register_forward_pre_hook(hook)
            idx, targets = batch(0)
            with ssdtrain.offload(model, {self.dir!r}, policy="offload-ssd") as off:
                loss_fn(model(idx), targets).backward()
            print("not interrupted")
        """)
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300)
        return p.returncode, p.stderr

    def test_ctrl_c_raises_keyboard_interrupt_and_removes_the_files(self):
        rc, err = self.run_and_signal(signal.SIGINT)
        self.assertNotEqual(rc, 0)
        self.assertIn("KeyboardInterrupt", err)
        self.assertEqual(os.listdir(self.dir), [])

    def test_sigterm_kills_the_process_and_the_handler_removes_the_files(self):
        rc, err = self.run_and_signal(signal.SIGTERM)
        self.assertEqual(rc, -signal.SIGTERM, err)
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main()
