#!/usr/bin/env python3
"""rewrite_kernels.py on small sources: launches (templated, over lines) naming the kernel's
address, static __shared__ declarations poisoned, both forms of `extern __shared__` made pointers
to the CTA's dynamic shared memory with their lines kept, and the forms it refuses named by line
(one at file scope, in a namespace or a class, and one it does not read)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewrite_kernels  # noqa: E402


def rewritten(src):
    return rewrite_kernels.poison_shared(
        rewrite_kernels.rewrite(rewrite_kernels.dynamic_shared(src)))


class RewriteKernels(unittest.TestCase):
    def test_a_templated_launch_passes_the_kernels_address(self):
        src = "void f() {\n  k<float, 4>\n      <<<g, b, 0, s>>>(x, y);\n}\n"
        self.assertEqual(
            rewritten(src),
            "void f() {\n  ::fsdp::emu::launch([](auto... emu_args) { k<float, 4>(emu_args...); }"
            ", \"k\", FSDP_EMU_KERNEL_ADDRESS(k<float, 4>),\n       g, b, 0, s)(x, y);\n}\n")

    def test_static_shared_is_poisoned_on_its_line(self):
        self.assertEqual(rewritten("void f() {\n  __shared__ float a[4], b[2];\n}\n"),
                         "void f() {\n  __shared__ float a[4], b[2]; "
                         "::fsdp::emu::poison_shared(&a, sizeof(a)); "
                         "::fsdp::emu::poison_shared(&b, sizeof(b));\n}\n")

    def test_aligned_extern_shared_becomes_the_ctas_dynamic_memory(self):
        src = ("namespace fsdp {\ntemplate <typename T>\n__global__ void k(T* p) {\n"
               "  extern __shared__ __align__(16) unsigned char flash_smem[];\n  p[0] = 1;\n}\n}\n")
        self.assertEqual(
            rewritten(src),
            "namespace fsdp {\ntemplate <typename T>\n__global__ void k(T* p) {\n"
            "  unsigned char* const flash_smem = static_cast<unsigned char*>("
            "::fsdp::emu::dynamic_shared(alignof(unsigned char) > (16) ? alignof(unsigned char) "
            ": (16)));\n  p[0] = 1;\n}\n}\n")

    def test_plain_extern_shared_over_lines_keeps_its_lines(self):
        src = "__global__ void k() {\n  extern __shared__\n      T tile[];\n  use(tile);\n}\n"
        out = rewritten(src)
        self.assertEqual(
            out, "__global__ void k() {\n  T* const tile = static_cast<T*>("
            "::fsdp::emu::dynamic_shared(alignof(T)));\n\n  use(tile);\n}\n")
        self.assertEqual(out.count("\n"), src.count("\n"))

    def test_comments_and_strings_are_left_alone(self):
        src = ("// extern __shared__ float x[];\n/* extern __shared__ float y[]; */\n"
               "const char* s = \"k<<<1, 2>>>(x) __shared__ int a;\";\n")
        self.assertEqual(rewritten(src), src)

    def assert_refused(self, src, message):
        with self.assertRaises(rewrite_kernels.RewriteError) as e:
            rewritten(src)
        self.assertEqual(str(e.exception), message)

    def test_file_scope_extern_shared_is_refused_by_line(self):
        at_file_scope = ("line {}: extern __shared__ at file scope: the emulation gives dynamic "
                         "shared memory to declarations inside kernels only")
        self.assert_refused("#include <x>\nextern __shared__ float x[];\n", at_file_scope.format(2))
        self.assert_refused('namespace a {\nextern "C" {\n\nextern __shared__ float x[];\n}\n}\n',
                            at_file_scope.format(4))
        self.assert_refused("struct S {\n  extern __shared__ float x[];\n};\n",
                            at_file_scope.format(2))

    def test_an_extern_shared_form_it_does_not_read_is_refused_by_line(self):
        unread = ("line {}: an extern __shared__ declaration the rewrite does not read (the form "
                  "is `extern __shared__ [__align__(N)] T name[];`)")
        self.assert_refused("void f() {\n\n  extern __shared__ float a[], b[];\n}\n",
                            unread.format(3))
        self.assert_refused("void f() {\n  extern __shared__ float a[64];\n}\n", unread.format(2))


if __name__ == "__main__":
    unittest.main()
