// Prints what the Surefire XML reports in a directory say: one line per test class with its
// passed, failed and skipped counts, each failed test with the first line of its message, then
// the total as the last line, `N passed, N failed` (skipped tests on the line before). Exits 1
// when any test failed or errored. Run by run.sh as a single-file program: `java Summary.java DIR`.

import java.io.File;
import java.util.Arrays;
import java.util.Comparator;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

public class Summary {
    public static void main(String[] args) throws Exception {
        File[] reports = new File(args[0]).listFiles((dir, name) -> name.startsWith("TEST-") && name.endsWith(".xml"));
        if (reports == null) {
            reports = new File[0];
        }
        Arrays.sort(reports, Comparator.comparing(File::getName));
        int passed = 0;
        int failed = 0;
        int skipped = 0;
        StringBuilder failures = new StringBuilder();
        for (File report : reports) {
            Element suite = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(report).getDocumentElement();
            String name = suite.getAttribute("name");
            String shortName = name.substring(name.lastIndexOf('.') + 1);
            int classPassed = 0;
            int classFailed = 0;
            int classSkipped = 0;
            NodeList cases = suite.getElementsByTagName("testcase");
            for (int i = 0; i < cases.getLength(); i++) {
                Element testCase = (Element) cases.item(i);
                Element problem = first(testCase, "failure");
                if (problem == null) {
                    problem = first(testCase, "error");
                }
                if (problem != null) {
                    classFailed++;
                    String message = problem.getAttribute("message");
                    if (message.isEmpty()) {
                        message = problem.getAttribute("type");
                    }
                    failures.append("  FAILED ").append(shortName).append('#').append(testCase.getAttribute("name"))
                        .append(": ").append(message.lines().findFirst().orElse("")).append('\n');
                } else if (first(testCase, "skipped") != null) {
                    classSkipped++;
                } else {
                    classPassed++;
                }
            }
            System.out.printf("%s: %d passed, %d failed, %d skipped%n", shortName, classPassed, classFailed,
                classSkipped);
            passed += classPassed;
            failed += classFailed;
            skipped += classSkipped;
        }
        System.out.print(failures);
        System.out.printf("%d skipped%n", skipped);
        System.out.printf("%d passed, %d failed%n", passed, failed);
        System.exit(failed == 0 && passed > 0 ? 0 : 1);
    }

    private static Element first(Element parent, String tag) {
        NodeList found = parent.getElementsByTagName(tag);
        return found.getLength() == 0 ? null : (Element) found.item(0);
    }
}
