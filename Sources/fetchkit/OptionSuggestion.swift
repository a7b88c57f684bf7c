/// The known option closest to one mistyped (`--paralel`: `--parallel`), as git and cargo
/// suggest a command: the fewest edits (insertions, deletions, substitutions, and swaps of two
/// neighbours), at most a third of its length (at least 2); the first in the list on a tie.
enum OptionSuggestion {
    /// The option of `known` closest to `typed`, or `nil` when none is close enough or
    /// `typed` is not a long option.
    static func closest(to typed: String, among known: [String]) -> String? {
        guard typed.hasPrefix("--"), typed.count > 3, typed.count <= 64 else { return nil }
        let limit = max(2, typed.count / 3)
        var best: (option: String, distance: Int)?
        for option in known {
            let distance = editDistance(Array(typed.lowercased()), Array(option))
            if distance <= limit, distance < best?.distance ?? .max { best = (option, distance) }
        }
        return best?.option
    }

    /// The optimal string alignment distance between `a` and `b`.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }
}
