// The probe helper (probe/sbx_probe.c, a static C program CMake builds beside sbx) carried inside
// sbx's read-only data, so that `sbx probe` needs no file next to the binary and works the same
// from the build tree, an installed package or a copied binary. `.incbin` copies the file's bytes
// at assembly time; CMake rebuilds this object when the helper changes (CMakeLists.txt,
// OBJECT_DEPENDS). The pages are never touched unless `sbx probe` writes them out.
#ifndef SBX_PROBE_HELPER_PATH
#error "SBX_PROBE_HELPER_PATH: the built probe helper (set by CMakeLists.txt)"
#endif
asm(".section .rodata.sbx_probe_helper,\"a\",@progbits\n"
    ".balign 16\n"
    ".globl sbx_probe_helper_begin\n"
    "sbx_probe_helper_begin:\n"
    ".incbin \"" SBX_PROBE_HELPER_PATH
    "\"\n"
    ".globl sbx_probe_helper_end\n"
    "sbx_probe_helper_end:\n"
    ".byte 0\n"
    ".previous\n");
