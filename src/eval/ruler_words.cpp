// The words RULER's tasks are written with: needle keys ("adjective-noun", as RULER pairs
// wonderwords' adjective and noun lists) and the common-words list (the three lists together).
// spattn's own lists of plain English words, lowercase ASCII, sorted.
#include "eval/ruler_common.hpp"

namespace spattn::eval {
namespace {

const char* const kAdjectives[] = {
    "able",     "absent",   "active",   "agile",   "amber",    "ancient",  "angry",    "anxious",
    "aquatic",  "arctic",   "ashamed",  "autumn",  "awake",    "bald",     "bashful",  "bitter",
    "bland",    "blank",    "bleak",    "blind",   "blond",    "blue",     "bold",     "bony",
    "bored",    "brave",    "brief",    "bright",  "brisk",    "broad",    "broken",   "brown",
    "bumpy",    "busy",     "calm",     "candid",  "careful",  "cheap",    "cheerful", "chilly",
    "clean",    "clever",   "cloudy",   "clumsy",  "coarse",   "cold",     "cosmic",   "cozy",
    "crafty",   "creamy",   "crisp",    "crooked", "cruel",    "curious",  "curly",    "damp",
    "dark",     "dear",     "deep",     "dense",   "dim",      "dirty",    "dizzy",    "double",
    "dry",      "dull",     "dusty",    "eager",   "early",    "eastern",  "easy",     "elder",
    "elegant",  "empty",    "endless",  "equal",   "even",     "exotic",   "faint",    "fair",
    "false",    "famous",   "fancy",    "fast",    "fierce",   "filthy",   "final",    "firm",
    "flat",     "fluffy",   "fond",     "foolish", "formal",   "fragile",  "frank",    "fresh",
    "friendly", "frozen",   "funny",    "fuzzy",   "gentle",   "giant",    "giddy",    "glad",
    "gloomy",   "golden",   "graceful", "grand",   "gray",     "greasy",   "great",    "green",
    "grim",     "gritty",   "grumpy",   "hairy",   "handsome", "happy",    "hard",     "harsh",
    "hasty",    "heavy",    "hidden",   "hollow",  "honest",   "hot",      "huge",     "humble",
    "hungry",   "icy",      "idle",     "ill",     "immense",  "inner",    "ivory",    "jolly",
    "juicy",    "keen",     "kind",     "lame",    "large",    "late",     "lazy",     "lean",
    "light",    "little",   "lively",   "lonely",  "long",     "loose",    "loud",     "lovely",
    "loyal",    "lucky",    "mad",      "magic",   "major",    "mellow",   "messy",    "mild",
    "minor",    "misty",    "modern",   "modest",  "moist",    "muddy",    "mute",     "narrow",
    "nasty",    "naughty",  "neat",     "nervous", "new",      "nice",     "noble",    "noisy",
    "normal",   "nutty",    "odd",      "old",     "open",     "orange",   "pale",     "patient",
    "plain",    "pleasant", "plump",    "polite",  "poor",     "precious", "pretty",   "prickly",
    "proud",    "purple",   "quick",    "quiet",   "rapid",    "rare",     "raw",      "ready",
    "red",      "rich",     "rigid",    "ripe",    "robust",   "rough",    "round",    "royal",
    "rude",     "rural",    "rusty",    "sad",     "salty",    "sandy",    "scary",    "secret",
    "shallow",  "sharp",    "shiny",    "short",   "shy",      "silent",   "silky",    "silly",
    "simple",   "sleepy",   "slim",     "slow",    "small",    "smooth",   "snowy",    "soft",
    "solid",    "sour",     "spicy",    "stale",   "steady",   "steep",    "sticky",   "stiff",
    "stormy",   "strange",  "strict",   "strong",  "sturdy",   "sunny",    "super",    "sweet",
    "swift",    "tall",     "tame",     "tender",  "thick",    "thin",     "thirsty",  "tidy",
    "tiny",     "tough",    "tricky",   "ugly",    "unique",   "upper",    "urban",    "vacant",
    "vague",    "vast",     "velvet",   "violet",  "vivid",    "warm",     "wary",     "weak",
    "weary",    "wet",      "white",    "wicked",  "wide",     "wild",     "windy",    "wise",
    "witty",    "wooden",   "woolly",   "yellow",  "young",    "zany",     "zealous",
};

const char* const kNouns[] = {
    "acorn",    "actor",    "airport",  "alarm",    "album",    "anchor",   "angle",   "animal",
    "ant",      "apple",    "apron",    "arch",     "arm",      "army",     "arrow",   "artist",
    "atlas",    "attic",    "aunt",     "avenue",   "baby",     "badge",    "bag",     "bakery",
    "ball",     "balloon",  "banana",   "band",     "bank",     "barn",     "basket",  "bath",
    "beach",    "bead",     "beam",     "bean",     "bear",     "beard",    "bed",     "bee",
    "beetle",   "bell",     "belt",     "bench",    "berry",    "bicycle",  "bird",    "blanket",
    "blossom",  "boat",     "bone",     "book",     "boot",     "bottle",   "boulder", "bow",
    "bowl",     "box",      "bracelet", "branch",   "bread",    "breeze",   "brick",   "bridge",
    "broom",    "brother",  "bubble",   "bucket",   "bull",     "bush",     "butter",  "button",
    "cabin",    "cable",    "cactus",   "cake",     "camel",    "camera",   "camp",    "candle",
    "canoe",    "canyon",   "cap",      "captain",  "car",      "card",     "carpet",  "carrot",
    "castle",   "cat",      "cave",     "ceiling",  "cellar",   "chair",    "chalk",   "cheese",
    "cherry",   "chicken",  "chimney",  "church",   "circle",   "city",     "cliff",   "clock",
    "cloud",    "coat",     "coconut",  "coin",     "comet",    "compass",  "cookie",  "copper",
    "corn",     "cottage",  "cotton",   "cousin",   "cow",      "crab",     "crane",   "crayon",
    "creek",    "crow",     "crown",    "cup",      "curtain",  "cushion",  "daisy",   "dancer",
    "desert",   "desk",     "diamond",  "dinosaur", "doctor",   "dog",      "doll",    "dolphin",
    "donkey",   "door",     "dragon",   "drawer",   "dream",    "drum",     "duck",    "dune",
    "eagle",    "ear",      "earth",    "egg",      "elbow",    "elephant", "elk",     "engine",
    "envelope", "eye",      "fabric",   "face",     "falcon",   "farm",     "farmer",  "feather",
    "fence",    "fern",     "field",    "finger",   "fire",     "fish",     "flag",    "flame",
    "flute",    "fog",      "forest",   "fork",     "fountain", "fox",      "frog",    "fruit",
    "garden",   "garlic",   "gate",     "gem",      "ghost",    "giraffe",  "glacier", "glass",
    "glove",    "goat",     "gold",     "goose",    "grape",    "grass",    "guitar",  "hammer",
    "hand",     "harbor",   "hat",      "hawk",     "heart",    "helmet",   "hill",    "hippo",
    "honey",    "hook",     "horn",     "horse",    "hotel",    "house",    "island",  "ivy",
    "jacket",   "jar",      "jelly",    "jewel",    "judge",    "jungle",   "kettle",  "key",
    "king",     "kitchen",  "kite",     "kitten",   "knee",     "knife",    "knot",    "ladder",
    "lake",     "lamp",     "lantern",  "leaf",     "lemon",    "letter",   "library", "lily",
    "lion",     "lizard",   "lobster",  "lock",     "lute",     "magnet",   "mango",   "map",
    "marble",   "market",   "meadow",   "melon",    "mirror",   "monkey",   "moon",    "moose",
    "moth",     "mountain", "mouse",    "mug",      "mushroom", "nail",     "needle",  "nest",
    "net",      "night",    "nurse",    "nut",      "oak",      "ocean",    "office",  "olive",
    "onion",    "orchard",  "otter",    "owl",      "paddle",   "paint",    "palace",  "panda",
    "paper",    "parrot",   "path",     "peach",    "pear",     "pearl",    "pebble",  "pen",
    "pencil",   "pepper",   "piano",    "pig",      "pillow",   "pilot",    "pine",    "pipe",
    "planet",   "plate",    "plum",     "pocket",   "pond",     "potato",   "puppet",  "puzzle",
    "queen",    "quilt",    "rabbit",   "raccoon",  "radio",    "rain",     "rainbow", "raven",
    "ribbon",   "rice",     "river",    "road",     "robin",    "rock",     "rocket",  "roof",
    "room",     "rope",     "rose",     "ruby",     "saddle",   "sail",     "salad",   "salmon",
    "sand",     "saucer",   "scarf",    "school",   "seal",     "seed",     "shadow",  "shark",
    "sheep",    "shell",    "ship",     "shoe",     "shovel",   "silver",   "singer",  "sister",
    "skate",    "sky",      "sled",     "snail",    "snake",    "snow",     "soap",    "sock",
    "sofa",     "spider",   "spoon",    "squirrel", "stable",   "star",     "stone",   "storm",
    "stove",    "straw",    "stream",   "street",   "sugar",    "sun",      "swan",    "sweater",
    "table",    "tail",     "teacher",  "teapot",   "tent",     "thread",   "throne",  "tiger",
    "toad",     "tomato",   "tooth",    "torch",    "tower",    "town",     "toy",     "tractor",
    "train",    "tree",     "truck",    "trumpet",  "tulip",    "tunnel",   "turtle",  "umbrella",
    "uncle",    "unicorn",  "valley",   "vase",     "violin",   "volcano",  "wagon",   "wall",
    "walnut",   "wand",     "water",    "wave",     "whale",    "wheat",    "wheel",   "whistle",
    "window",   "wing",     "winter",   "wizard",   "wolf",     "wool",     "worm",    "yak",
    "yard",     "yarn",     "zebra",    "zipper",
};

const char* const kVerbs[] = {
    "accept",   "admire",  "adopt",    "allow",  "answer",  "appear",   "arrive", "ask",
    "bake",     "balance", "bathe",    "beg",    "behave",  "believe",  "blink",  "boil",
    "borrow",   "bounce",  "breathe",  "build",  "bury",    "call",     "carry",  "catch",
    "chase",    "cheer",   "chew",     "climb",  "collect", "compare",  "cook",   "cough",
    "count",    "crawl",   "cry",      "dance",  "deliver", "describe", "dig",    "discover",
    "dive",     "divide",  "drift",    "drink",  "drive",   "drop",     "earn",   "enjoy",
    "escape",   "explain", "explore",  "fetch",  "fill",    "find",     "fix",    "float",
    "fold",     "follow",  "forgive",  "gather", "giggle",  "glow",     "grab",   "greet",
    "grow",     "guess",   "guide",    "hang",   "help",    "hide",     "hike",   "hop",
    "hover",    "hug",     "hum",      "hunt",   "hurry",   "imagine",  "invent", "invite",
    "jog",      "join",    "juggle",   "jump",   "kick",    "kneel",    "knit",   "knock",
    "laugh",    "launch",  "lead",     "learn",  "lend",    "lift",     "listen", "live",
    "march",    "measure", "melt",     "mend",   "mix",     "move",     "nod",    "notice",
    "obey",     "offer",   "open",     "order",  "pack",    "paint",    "pause",  "peel",
    "pick",     "plant",   "play",     "polish", "pour",    "pray",     "print",  "promise",
    "pull",     "push",    "question", "race",   "rain",    "reach",    "read",   "relax",
    "remember", "repair",  "rescue",   "rest",   "return",  "ride",     "ring",   "roar",
    "roll",     "run",     "rush",     "sail",   "scatter", "scream",   "search", "shake",
    "share",    "shine",   "shiver",   "shout",  "sing",    "sink",     "sip",    "sit",
    "skip",     "sleep",   "slide",    "smile",  "sneeze",  "sniff",    "speak",  "spill",
    "spin",     "splash",  "stare",    "steer",  "stir",    "stretch",  "swim",   "swing",
    "talk",     "taste",   "teach",    "throw",  "tickle",  "travel",   "trust",  "try",
    "tumble",   "turn",    "twist",    "unlock", "unpack",  "vanish",   "visit",  "wait",
    "walk",     "wander",  "want",     "wash",   "watch",   "wave",     "weave",  "whisper",
    "win",      "wink",    "wish",     "wobble", "worry",   "write",    "yawn",   "yell",
    "zoom",
};

template <size_t N>
std::vector<std::string> to_vector(const char* const (&a)[N]) {
  return std::vector<std::string>(std::begin(a), std::end(a));
}

}  // namespace

const std::vector<std::string>& ruler_adjectives() {
  static const std::vector<std::string> v = to_vector(kAdjectives);
  return v;
}
const std::vector<std::string>& ruler_nouns() {
  static const std::vector<std::string> v = to_vector(kNouns);
  return v;
}
const std::vector<std::string>& ruler_verbs() {
  static const std::vector<std::string> v = to_vector(kVerbs);
  return v;
}

}  // namespace spattn::eval
