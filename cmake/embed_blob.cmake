# cmake -DIN=file -DOUT=file.cpp -DNAME=symbol -P embed_blob.cmake: the bytes of IN as
#   extern const unsigned char NAME[]; extern const unsigned long NAME_size;
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/embed_blob.cmake; do not edit.\nextern const unsigned char ${NAME}[] = {\n${body}\n};\nextern const unsigned long ${NAME}_size = ${bytes};\n")
