# SPDX-License-Identifier: Apache-2.0
# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes OUT defining `const char *const NAME` (IN's bytes, NUL-terminated)
# and `const size_t NAME_len` (without the NUL): a file compiled into a binary.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}.tmp" "/* generated from ${IN} by cmake/embed.cmake; do not edit */\n#include <stddef.h>\nstatic const unsigned char bytes[] = {\n  ${bytes}0x00};\nconst char *const ${NAME} = (const char *)bytes;\nconst size_t ${NAME}_len = ${len};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
