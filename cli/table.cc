#include "cli/table.h"

#include <algorithm>
#include <utility>

#include "cli/terminal_text.h"

namespace det::cli {
namespace {

// Removes trailing spaces from `line` and writes it with a newline.
void WriteLine(std::ostream& out, std::string line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
  out << line << '\n';
}

}  // namespace

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  if (cells.size() < headers_.size()) cells.resize(headers_.size());
  for (auto& cell : cells) cell = TerminalText(cell);  // server text: no escapes, one line
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out) const {
  size_t ncols = headers_.size();
  for (const auto& row : rows_) ncols = std::max(ncols, row.size());
  if (ncols == 0) return;
  std::vector<size_t> widths(ncols, 0);
  auto measure = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(cells[i]));
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);

  auto format = [&](const std::vector<std::string>& cells) {
    // Trailing empty cells print nothing, not even their separator.
    size_t used = cells.size();
    while (used > 0 && cells[used - 1].empty()) --used;
    std::string line;
    for (size_t i = 0; i < used; ++i) {
      const std::string& cell = cells[i];
      line += i == 0 ? " " : " | ";
      line += cell;
      line.append(widths[i] - DisplayWidth(cell), ' ');
    }
    return line;
  };
  WriteLine(out, format(headers_));
  std::string sep;
  for (size_t i = 0; i < ncols; ++i) {
    if (i > 0) sep += '+';
    sep.append(widths[i] + 2, '-');
  }
  WriteLine(out, sep);
  for (const auto& row : rows_) WriteLine(out, format(row));
}

void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t width = 0;
  for (const auto& [k, v] : rows) width = std::max(width, DisplayWidth(k));
  for (const auto& [k, v] : rows) {
    std::string line = k + ":";
    line.append(width - DisplayWidth(k) + 1, ' ');
    line += TerminalText(v);  // server text: no escapes, one line
    WriteLine(out, line);
  }
}

}  // namespace det::cli
