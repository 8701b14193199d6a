// Paths are bytes on Linux; messages and JSON documents are UTF-8 text. This
// is the one representation that joins them, used wherever relpos shows a
// path (error messages, stdout, JSON it prints) or stores one (a string
// setting in a checkpoint's config.json, compare.json):
//
//   PathText("runs/a.txt")  == "runs/a.txt"       valid, printable UTF-8: as is
//   PathText("t\xff.txt")   == "\"t\\xff.txt\""    otherwise quoted, C escapes
//
// The quoted form (git's core.quotePath convention) is used when the bytes
// are not well-formed UTF-8, hold a control character (C0, DEL or C1), or
// start with a double quote; inside it \\ \" \n \t \r stand for themselves
// and \xHH for any other byte. It is always valid, printable, one-line
// UTF-8 (so nlohmann::json can dump it and a message stays one line), and it
// is reversible: PathFromText(PathText(p)) == p for every byte string p.
#ifndef RELPOS_SRC_BASE_IO_PATH_TEXT_H_
#define RELPOS_SRC_BASE_IO_PATH_TEXT_H_

#include <string>
#include <string_view>

namespace relpos::io {

// Whether `bytes` is well-formed UTF-8 (Unicode 15, table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF) without control characters.
bool IsPrintableUtf8(std::string_view bytes);

// The representation above.
std::string PathText(std::string_view path);

// Inverse of PathText: text in the quoted form is unescaped, anything else
// is returned unchanged. FormatError naming `what` for a quoted form with a
// bad escape.
std::string PathFromText(std::string_view text, std::string_view what = "path");

// For messages: 'runs/a.txt', or the quoted form itself ("t\xff.txt").
std::string QuotedPath(std::string_view path);

}  // namespace relpos::io

#endif  // RELPOS_SRC_BASE_IO_PATH_TEXT_H_
