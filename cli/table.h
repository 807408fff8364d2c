// A plain-text table with aligned columns, for det-cli's human output.
//
//   Table t({"ID", "STATE"});
//   t.AddRow({"1", "ACTIVE"});
//   t.Print(std::cout);
//
// prints
//
//    ID | STATE
//   ----+--------
//    1  | ACTIVE
//
// Not thread-safe; a Table is filled and printed by one thread.
#ifndef DET_CLI_TABLE_H_
#define DET_CLI_TABLE_H_

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace det::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // Appends a row. Rows shorter than the header are padded with empty cells;
  // extra cells are kept and get their own (headerless) columns. Each cell is
  // stored as TerminalText(cell) (terminal_text.h): control characters and
  // newlines show as escapes, so a cell cannot move the cursor or add a row.
  void AddRow(std::vector<std::string> cells);

  size_t num_rows() const { return rows_.size(); }

  // Writes the header, a separator line and every row, each cell padded to
  // its column's widest cell (widths count UTF-8 code points). Lines carry no
  // trailing spaces.
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Number of UTF-8 code points in `s` (bytes that are not continuation bytes).
size_t DisplayWidth(const std::string& s);

// Writes "key: value" lines with the values aligned after the longest key;
// each value is printed as TerminalText(value) (one line, no escapes).
void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& rows);

}  // namespace det::cli

#endif  // DET_CLI_TABLE_H_
